<?xml version="1.0"?>
<!-- ISO-8859-1 output: Latin-1 characters as bytes, others as character references. -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:output method="xml" encoding="ISO-8859-1" indent="no"/>
  <xsl:template match="/">
    <names>
      <xsl:for-each select="//buyerID | //name">
        <n len="{string-length(.)}"><xsl:value-of select="."/></n>
      </xsl:for-each>
      <fixed>café – 10 € · naïve</fixed>
    </names>
  </xsl:template>
</xsl:stylesheet>
