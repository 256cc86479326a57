<?xml version="1.0"?>
<!-- Text output never escapes; disable-output-escaping in XML output. -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="text" encoding="UTF-8"/>
  <xsl:template match="/">
    <xsl:for-each select="//*[not(*)]">
      <xsl:value-of select="concat(name(), '=', ., '&#10;')"/>
    </xsl:for-each>
    <xsl:value-of select="'&lt;a&gt; &amp; &quot;q&quot;&#10;'"/>
  </xsl:template>
</xsl:stylesheet>
