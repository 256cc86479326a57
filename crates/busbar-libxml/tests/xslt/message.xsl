<?xml version="1.0"?>
<!-- Non-terminating xsl:message: output is unaffected, messages are reported aside. -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="text"/>
  <xsl:template match="/">
    <xsl:message>starting with <xsl:value-of select="count(//order)"/> orders</xsl:message>
    <xsl:for-each select="//order[1]">
      <xsl:message terminate="no">first: <xsl:value-of select="symbol"/></xsl:message>
      <xsl:value-of select="symbol"/>
    </xsl:for-each>
    <xsl:text>&#10;</xsl:text>
  </xsl:template>
</xsl:stylesheet>
